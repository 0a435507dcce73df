"""The server's own clock: which steps a shard accepts.

Every training request carries the sender's step, and rows remember the step that last touched
them (time to live, the protection of rows in flight: ``memory.py``). Taken on trust, one request
of step 2**32 - 1 would make every trained row look ancient and the next sweep would delete them
all. So a shard keeps its own clock and judges each step against it:

    clock     the highest step this shard has accepted (0, or the step of the checkpoint it
              loaded); every worker's requests move it, each by at most ``ahead``
    admit     a request of a step more than ``ahead`` past the clock is refused whole
              (``ps.limits.max_step_ahead``; INVALID_ARGUMENT over gRPC): nothing changes

So no single request can move the steps that time to live and "recently touched" measure
against by more than ``ahead`` (keep ``ps.memory.eviction.ttl_steps`` well above it), and a request from
the future is refused with a message that names the setting. Older steps are always accepted:
a slow worker's, or a resend's.
"""

import threading

from cardinal.ps.limits import MAX_STEP_AHEAD


class StepClock:
    def __init__(self, ahead: int = MAX_STEP_AHEAD, step: int = 0):
        self.ahead = ahead
        self.step = step
        self._lock = threading.Lock()

    def admit(self, step: int) -> None:
        """Refuse ``step`` if it runs more than ``ahead`` past the clock. Moves nothing: ``advance``
        once the request is applied, so a refused request leaves the clock where it was."""
        clock = self.step
        if step > clock + self.ahead:
            raise ValueError(f"step {step} is more than ps.limits.max_step_ahead = {self.ahead} steps past this "
                             f"server's clock (step {clock}, the newest it accepted): a request from the future would "
                             "age every row at once; send steps as training reaches them, or raise "
                             "ps.limits.max_step_ahead")

    def advance(self, step: int) -> None:
        with self._lock:
            if step > self.step:
                self.step = step

    def reset(self, step: int) -> None:
        """A checkpoint of ``step`` was loaded: the clock starts there."""
        with self._lock:
            self.step = step
