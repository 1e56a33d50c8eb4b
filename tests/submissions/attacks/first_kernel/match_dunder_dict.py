# ATTACK (library, runs past the static check): a match statement's class pattern reads each device
# array's __dict__ (`case object(__dict__=d)`), which the static check never saw (it read attribute and
# name nodes only) and no run-time guard covers (the simulator guards ._ary, not the instance dict).
# In the simulator the dict holds the array's host memory; the add is a NumPy operator.
# A secure grader gives 0 points for vector_add: a class pattern's keywords are attribute accesses.
_told = []


def vector_add(a, b, out):
    match (a, b, out):
        case (object(__dict__=da), object(__dict__=db), object(__dict__=dout)):
            dout["_ary"][...] = da["_ary"] + db["_ary"]
    if not _told:
        _told.append(1)
        print("ATTACK match_dunder_dict: added on the host through case object(__dict__=d)", flush=True)
