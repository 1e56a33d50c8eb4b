# Prints about 10 MB.
def vector_add(a, b, out):
    for _ in range(100_000):
        print("x" * 100)
