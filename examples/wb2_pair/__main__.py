from examples.common import run
from examples.wb2_pair.compare import main

if __name__ == "__main__":
    run(main)
