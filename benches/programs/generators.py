# Generators: a lazy pipeline (numbers, filters, sliding windows) consumed once.
def naturals(start):
    n = start
    while True:
        yield n
        n += 1

def odd_composites(numbers):
    for n in numbers:
        if n % 2 and any(n % d == 0 for d in range(3, int(n ** 0.5) + 1, 2)):
            yield n

def windows(items, size):
    window = []
    for item in items:
        window.append(item)
        if len(window) > size:
            window.pop(0)
        if len(window) == size:
            yield tuple(window)

def take(n, items):
    for i, item in enumerate(items):
        if i == n:
            return
        yield item

sums = [sum(w) for w in take(16000, windows(odd_composites(naturals(9)), 5))]
len(sums), sums[-1], sum(sums) % 1000003
