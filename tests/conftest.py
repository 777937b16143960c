import os
import sys

# Make the test helpers (tests/oracle, tests/_util.py) importable as top-level modules.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
