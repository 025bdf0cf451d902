"""``python -m kop_spark.cli``."""

import sys

from . import main

sys.exit(main())
