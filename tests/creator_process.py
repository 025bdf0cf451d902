"""Creates a topic at each line read (its name), for the tests of racing creators; prints
"made" or the type of the error that refused it."""

import sys

from kop_spark import Broker
from kop_spark.errors import KopError

b = Broker(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    try:
        b.create_topic(line.strip(), 1)
        print("made", flush=True)
    except KopError as e:
        print(type(e).__name__, flush=True)
b.close()
