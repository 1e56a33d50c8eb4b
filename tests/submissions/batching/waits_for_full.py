# Waits for a full batch of chat turns: at the end of a trace the last requests wait forever.
def schedule(waiting, now):
    short = [k for k, (_, length) in enumerate(waiting) if length <= 32]
    return short[:64] if len(short) >= 64 else []
