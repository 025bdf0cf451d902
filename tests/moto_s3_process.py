"""moto's S3 server with its conditional PUTs atomic, as S3's are. moto checks ``If-Match`` and
``If-None-Match``, then stores the object, with no lock between the two: of two writers racing one
compare-and-set, both could win (seen once: two writer processes each told their append landed at
the same offset, one of them lost). Its PUTs are taken one at a time; all else runs as moto runs it.
``KOP_SWITCH_INTERVAL`` (seconds) makes its threads switch that often, so a race shows."""

import os
import sys
import threading

from moto.s3.responses import S3Response
from moto.server import main

if "KOP_SWITCH_INTERVAL" in os.environ:
    sys.setswitchinterval(float(os.environ["KOP_SWITCH_INTERVAL"]))
_put_object = S3Response.put_object
_one_at_a_time = threading.Lock()


def put_object(self):
    with _one_at_a_time:
        return _put_object(self)


S3Response.put_object = put_object
main(sys.argv[1:])
