"""python -m torch_delegate backends | plan | report | needs (see torch_delegate._cli)."""
import sys

from ._cli import main

sys.exit(main())
