from examples.common import run
from examples.sdss.train import main

run(main)
