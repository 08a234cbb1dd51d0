import sys

from drumbeat.cli import main

sys.exit(main())
