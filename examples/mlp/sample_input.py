"""Print a sample input for the MLP example as JSON: `gpux run mlp --input "$(python sample_input.py)"`."""

import json
import math

print(json.dumps({"x": [[round(math.sin(i / 4), 4) for i in range(64)]]}))
