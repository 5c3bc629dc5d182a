from examples.common import run
from examples.microscopy.train import main

run(main)
