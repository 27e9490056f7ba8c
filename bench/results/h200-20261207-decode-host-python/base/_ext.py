"""The installed extension, under the base package (the probe imports both packages against one build)."""
import sys

import flashattn._ext as _module

sys.modules[__name__] = _module
