"""Which implementation of the codec's hot loops runs: the compiled ``_crecords`` when it is built,
else the pure-Python reference ``_pyrecords`` (identical results, slower).

The compiled twin is optional, as aiokafka's and pyiceberg's are: without a C compiler the install
still works. Set ``KOP_SPARK_NO_EXTENSIONS=1`` to run the reference on purpose.
"""

from __future__ import annotations

import os
from types import ModuleType

from . import _pyrecords

compiled: ModuleType | None = None
if not os.environ.get("KOP_SPARK_NO_EXTENSIONS"):
    try:
        from . import _crecords as compiled
    except ImportError:
        pass

reference: ModuleType = _pyrecords
codec: ModuleType = compiled or reference
