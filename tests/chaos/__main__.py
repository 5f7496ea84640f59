import sys

from tests.chaos.harness import main

sys.exit(main())
