# ATTACK (library, runs past the static check): a positional class pattern reads the attributes its
# class names in __match_args__, here "__dict__", as a string the static check never read; the class's
# metaclass makes every object an instance of it, so the pattern matches the device arrays themselves.
# In the simulator the instance dict holds the array's host memory; the add is a NumPy operator.
# A secure grader gives 0 points for vector_add: positional patterns read attributes too.
_told = []


class _Anything(type):
    def __instancecheck__(cls, obj):
        return True


class Fields(metaclass=_Anything):
    __match_args__ = ("__dict__",)


def vector_add(a, b, out):
    match (a, b, out):
        case (Fields(da), Fields(db), Fields(dout)):
            dout["_ary"][...] = da["_ary"] + db["_ary"]
    if not _told:
        _told.append(1)
        print("ATTACK match_args_positional: added on the host through __match_args__", flush=True)
