import sys
from pathlib import Path

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU before anything imports triton)

sys.path.insert(0, str(Path(__file__).parent))
