"""Which implementation of the codec's hot loops runs: the compiled ``_crecords`` when it is built,
else the pure-Python reference ``_pyrecords`` (identical results, slower).

The compiled twin is optional, as aiokafka's and pyiceberg's are: without a C compiler the install
still works. Set ``KOP_SPARK_NO_EXTENSIONS=1`` to run the reference on purpose.
"""

from __future__ import annotations

import os

from . import _pyrecords
from .codec import RecordsCodec


def _compiled() -> RecordsCodec | None:
    if os.environ.get("KOP_SPARK_NO_EXTENSIONS"):
        return None
    try:
        from . import _crecords
    except ImportError:
        return None
    return _crecords


compiled: RecordsCodec | None = _compiled()
reference: RecordsCodec = _pyrecords
codec: RecordsCodec = compiled or reference
