# Recursion with sets: every placement of N queens by backtracking, columns and diagonals kept in
# sets.
def queens(n, row=0, cols=frozenset(), up=frozenset(), down=frozenset()):
    if row == n:
        return 1
    found = 0
    for col in range(n):
        if col in cols or row + col in up or row - col in down:
            continue
        found += queens(n, row + 1, cols | {col}, up | {row + col}, down | {row - col})
    return found

[queens(n) for n in (4, 6, 8, 9, 10)]
