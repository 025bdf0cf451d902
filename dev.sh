#!/usr/bin/env bash
# One entry point for set-up, the demo and the tests. Creates .venv and installs what is missing.
#   ./dev.sh demo   set up, then run the main job on the embedded local store
#   ./dev.sh test   set up, then check lint, formatting and types, then run the test suite
#                   (all but the scale tests marked slow: ./dev.sh test -m slow runs those)
#   ./dev.sh check  set up, then only lint, formatting and types (seconds)
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
VENV=.venv

# Install this checkout into the venv $1, only when the declared dependencies or the compiled
# twins' sources changed since it was last installed there; returns 1 when nothing was done.
install_project() {
    local stamp="$1/.kop-installed" want
    want=$( (cat pyproject.toml setup.py kop_spark/*/*.[ch]) | cksum)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 1
    fi
    "$1/bin/python" -m pip install --quiet --upgrade pip
    # The editable install of this flat layout puts the checkout on sys.path (a .pth file), where
    # Spark looks for pyspark_* data sources, and builds the optional compiled codec in place
    # (skipped, with a warning, without a C compiler). [spark] brings PySpark to this machine.
    # --no-compile: compiling every module of the dependencies took pip 46 s of its 113 (Python
    # 3.12); what is imported is compiled then, once, where bytecode is kept.
    "$1/bin/python" -m pip install --quiet --no-compile -e ".[spark,test]"
    echo "$want" > "$stamp"
}

setup_python() {
    if [ ! -x "$VENV/bin/python" ]; then
        "$PY" -m venv "$VENV"
    fi
    if install_project "$VENV" &&
        ! "$VENV/bin/python" -c "import sys; from kop_spark.record._speedups import compiled; sys.exit(compiled is None)"; then
        echo "note: the compiled codec was not built (no C compiler or Python headers?); running the" >&2
        echo "      pure-Python codec, which is several times slower (see README, Speed)" >&2
    fi
}

setup_java() {
    # Spark 4 runs on Java 17 or 21.
    if command -v java >/dev/null 2>&1 && java -version 2>&1 | grep -Eq 'version "(17|21)'; then
        return
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "Installing Java 17 for Spark (apt-get openjdk-17-jre-headless)..." >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    else
        echo "Spark needs Java 17 or 21 on PATH (or JAVA_HOME). Install it, e.g." >&2
        echo "  sudo apt-get install openjdk-17-jre-headless   # Debian/Ubuntu" >&2
        echo "  brew install openjdk@17                        # macOS" >&2
        exit 1
    fi
}

setup_servers() {
    # The servers and clients the tests start on loopback: ZooKeeper and etcd from Debian's
    # packages (not started as services) and kcat (librdkafka's command-line client); Azurite
    # (Microsoft's Azure Storage emulator) and kafkajs from npm into .tools/. moto's S3 server and
    # the Python Kafka clients come with the Python test dependencies.
    if ! command -v etcd >/dev/null 2>&1 || [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v kcat >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "Installing etcd, ZooKeeper and kcat for the tests (apt-get etcd-server zookeeper kcat)..." >&2
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server zookeeper kcat >/dev/null
        else
            echo "The tests need etcd, ZooKeeper and kcat: sudo apt-get install etcd-server zookeeper kcat" >&2
            exit 1
        fi
    fi
    if [ ! -x .tools/node_modules/.bin/azurite-blob ] || [ ! -d .tools/node_modules/kafkajs ]; then
        if ! command -v npm >/dev/null 2>&1; then
            echo "The tests need Azurite and kafkajs, from npm: install Node.js 18+ and npm, then rerun" >&2
            exit 1
        fi
        echo "Installing Azurite and kafkajs for the tests (npm, into .tools/)..." >&2
        npm install --silent --no-audit --no-fund --prefix .tools azurite@3 kafkajs@2 >/dev/null
    fi
}

# Older PySpark versions Databricks runs (17.3 LTS: 4.0, 18 LTS: 4.1, 19: 4.2), each in
# .tools/pyspark-<version>, which tests/test_spark_versions.py puts ahead of the environment's.
PYSPARK_VERSIONS="4.0.5 4.1.4 4.2.1"

setup_pyspark_versions() {
    local v
    for v in $PYSPARK_VERSIONS; do
        if [ ! -f ".tools/pyspark-$v/pyspark/__init__.py" ]; then
            echo "Installing PySpark $v for the version tests (into .tools/pyspark-$v)..." >&2
            "$VENV/bin/python" -m pip install --quiet --no-compile --no-deps --target ".tools/pyspark-$v" "pyspark==$v"
        fi
    done
}

# Databricks runtimes run Python 3.12 (17.3 LTS, 18, 19 and serverless), whatever this machine's
# python3 is: tests/test_spark_versions.py runs the Spark suite on it too, from .tools/py312, made
# from a python3.12 on PATH or one pyenv holds.
DATABRICKS_PYTHON=3.12

setup_databricks_python() {
    local venv=.tools/py$DATABRICKS_PYTHON found c
    if [ ! -x "$venv/bin/python" ]; then
        found=
        for c in "python$DATABRICKS_PYTHON" "$(pyenv root 2>/dev/null)"/versions/"$DATABRICKS_PYTHON".*/bin/python"$DATABRICKS_PYTHON"; do
            if "$c" -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$DATABRICKS_PYTHON')" >/dev/null 2>&1; then
                found=$c
                break
            fi
        done
        if [ -z "$found" ]; then
            echo "note: no Python $DATABRICKS_PYTHON here, so the Spark tests on Databricks' Python are skipped:" >&2
            echo "      install it (pyenv install $DATABRICKS_PYTHON, or your system's package) and rerun" >&2
            return
        fi
        "$found" -m venv "$venv"
        echo "Installing kop-spark and PySpark on Python $DATABRICKS_PYTHON for the tests (into $venv)..." >&2
    fi
    install_project "$venv" || true
}

check() {
    # The gates CI keeps: ruff's lint and format, and mypy (settings in pyproject.toml).
    "$VENV/bin/ruff" check kop_spark pyspark_kop tests bench setup.py
    "$VENV/bin/ruff" format --check --quiet kop_spark pyspark_kop tests bench setup.py
    "$VENV/bin/mypy"
}

export PYSPARK_PYTHON="$PWD/$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/$VENV/bin/python"

case "${1:-}" in
    demo)
        setup_python; setup_java; shift
        exec "$VENV/bin/python" -m kop_spark.demo "$@" ;;
    test)
        setup_python; setup_java; setup_servers; setup_pyspark_versions; setup_databricks_python; shift
        check
        # The tests start Python subprocesses by the thousand: each compiling kop_spark afresh
        # (where the environment says not to keep bytecode) took a fifth of a second more.
        unset PYTHONDONTWRITEBYTECODE
        # The tests' temporary stores on tmpfs where there is room: on the development VM's disk,
        # creating, syncing and deleting files took three quarters of the time of the tests that
        # inject a fault at every step (one: 128 s on disk, 34 s on tmpfs).
        if [ -z "${PYTEST_DEBUG_TEMPROOT:-}" ] && [ -w /dev/shm ] &&
            [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt $((8 << 20)) ]; then
            export PYTEST_DEBUG_TEMPROOT=/dev/shm
        fi
        # Two workers, each a file at a time (a module's servers and Spark Connect start once), in
        # the order collected (the longest file first; xdist would put files of many tests first):
        # much of the suite waits on subprocesses, servers and one core, so two take about half.
        exec "$VENV/bin/python" -m pytest -q --numprocesses 2 --dist loadfile --no-loadscope-reorder "$@" ;;
    check)
        setup_python; check ;;
    setup)
        setup_python; setup_java; setup_servers; setup_pyspark_versions; setup_databricks_python ;;
    *)
        echo "usage: ./dev.sh demo|test|check|setup" >&2; exit 2 ;;
esac
