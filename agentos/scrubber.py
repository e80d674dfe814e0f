"""The scrubber, kept here for the apps that import it: it lives in `kernel.secrets`, since the
journal (kernel-side) writes through it."""

from kernel.secrets import MARK as MARK
from kernel.secrets import MIN_SECRET as MIN_SECRET
from kernel.secrets import SHAPES as SHAPES
from kernel.secrets import forget as forget
from kernel.secrets import register as register
from kernel.secrets import scrub as scrub
from kernel.secrets import scrub_value as scrub_value
