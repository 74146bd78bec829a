# Floats: a damped spring system integrated step by step, as a model writes a small simulation.
masses = [1.0 + 0.1 * i for i in range(40)]
pos = [0.01 * i + 0.002 * (i % 3) for i in range(40)]
vel = [0.0] * 40
k, damping, dt = 12.5, 0.02, 0.001
energy = []
for step in range(1800):
    forces = [0.0] * 40
    for i in range(39):
        stretch = pos[i + 1] - pos[i] - 0.01
        forces[i] += k * stretch
        forces[i + 1] -= k * stretch
    for i in range(40):
        vel[i] += (forces[i] / masses[i] - damping * vel[i]) * dt
        pos[i] += vel[i] * dt
    if step % 100 == 0:
        energy.append(sum(0.5 * m * v * v for m, v in zip(masses, vel)))
round(sum(pos), 9), round(max(energy), 12)
