# Big integers: exact factorials, Fibonacci numbers and modular powers, as a model checks a
# number-theory claim (digits taken by division: CPython limits str() of huge ints).
def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

def digit_sum(n):
    total = 0
    while n:
        n, chunk = divmod(n, 10**18)
        while chunk:
            chunk, d = divmod(chunk, 10)
            total += d
    return total

f = 1
for i in range(2, 4500):
    f *= i
big = fib(40000)
mods = sum(pow(3, big % 10**9 + e, 10**9 + 7) for e in range(300))
digit_sum(f), big.bit_length(), big % 1000003, mods
