# Aborts the process running the policy on its first decision (a crash in native code would
# look the same): the exercise gets a plain message, the batch goes on.
import os


def schedule(waiting, now):
    os.abort()
