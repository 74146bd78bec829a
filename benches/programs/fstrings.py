# f-strings: a report of aligned rows, formatted numbers and percentages, then checksummed.
import zlib

rows = []
for i in range(14000):
    qty = i * 7 % 113
    price = (i * 13 % 997) / 7
    share = qty / 113
    rows.append(f"{i:>6} | {'sku-' + str(i % 431):<9} | {qty:>4d} x {price:>9.3f} = {qty * price:>12,.2f} | {share:6.1%} | {i:#06x}")
report = "\n".join(rows)
len(report), zlib.crc32(report.encode())
