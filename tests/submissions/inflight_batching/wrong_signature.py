# Lab 12's signature: the engine calls schedule with four arguments.
def schedule(waiting, now):
    return [0]
