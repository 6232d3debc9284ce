"""The one scheduler of the models' work: the policy (policy.py, pure logic) and the lanes that
the model code's threads take and give up at each unit's boundary (scheduler.py)."""

from speaker_asr.scheduling.policy import Priority, SchedulePolicy
from speaker_asr.scheduling.scheduler import Job, Scheduler, WorkCancelled, checkpoint, thread_waited

__all__ = ["Job", "Priority", "SchedulePolicy", "Scheduler", "WorkCancelled", "checkpoint", "thread_waited"]
