"""An agent that fails before its first model call: one line on stderr, exit code 3."""

import sys

print("crash_agent: cannot reach the payments database", file=sys.stderr)
sys.exit(3)
