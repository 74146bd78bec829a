//! `_random`, the generator under Python's `random` module, as the guest's own module in place of
//! RustPython's: the same Mersenne Twister (the `mt19937` crate), so a given seed draws the numbers
//! CPython draws, plus [`PyRandom::seed_from_entropy`], which lets every fresh instance reseed the
//! snapshot's `random._inst` by copying 2.5 KB of the host's entropy into its state. Seeding
//! through `init_by_array` instead (all RustPython's module offers) cost each fresh call about
//! 75 k fuel, a third of running `x = 1`.

pub(crate) use _random::{PyRandom, module_def};

#[rustpython_vm::pymodule]
mod _random {
    use malachite_bigint::{BigInt, BigUint, Sign};
    use mt19937::MT19937;
    use rand::{Rng as _, TryRng as _};
    use rustpython_vm::builtins::{PyInt, PyTupleRef};
    use rustpython_vm::common::lock::PyMutex;
    use rustpython_vm::function::OptionalArg;
    use rustpython_vm::types::{Constructor, DefaultConstructor, Initializer};
    use rustpython_vm::{Py, PyObjectRef, PyPayload, PyResult, VirtualMachine, pyclass};

    #[pyattr]
    #[pyclass(name = "Random")]
    #[derive(Debug, PyPayload, Default)]
    pub(crate) struct PyRandom {
        rng: PyMutex<MT19937>,
    }

    impl DefaultConstructor for PyRandom {}

    impl Initializer for PyRandom {
        type Args = OptionalArg<PyObjectRef>;

        fn init(zelf: &Py<Self>, seed: Self::Args, vm: &VirtualMachine) -> PyResult<()> {
            Self::seed(zelf, seed, vm)
        }
    }

    impl PyRandom {
        /// A whole new state from the host's entropy (WASI `random_get`), as `seed(None)` makes.
        pub(crate) fn seed_from_entropy(&self, vm: &VirtualMachine) -> PyResult<()> {
            let mut bytes = [0u8; mt19937::N * 4];
            rand::rngs::SysRng
                .try_fill_bytes(&mut bytes)
                .map_err(|e| vm.new_os_error(format!("cannot seed the random generator: {e}")))?;
            let mut state = [0u32; mt19937::N];
            for (word, chunk) in state.iter_mut().zip(bytes.chunks_exact(4)) {
                *word = u32::from_le_bytes(chunk.try_into().expect("chunks of 4"));
            }
            // As `init_by_array` does: the top bit set rules out the all-zero state.
            state[0] |= 0x8000_0000;
            let mut rng = self.rng.lock();
            rng.set_state(&state);
            // The whole state is unused: the next draw computes a fresh block from it.
            rng.set_index(mt19937::N);
            Ok(())
        }
    }

    #[pyclass(flags(BASETYPE), with(Constructor, Initializer))]
    impl PyRandom {
        #[pymethod]
        fn random(zelf: &Py<Self>) -> f64 {
            mt19937::gen_res53(&mut *zelf.rng.lock())
        }

        /// `None` (or nothing) seeds from the host's entropy; an int by its absolute value's
        /// 32-bit digits, as CPython does; anything else by its hash. `random.Random.seed` turns
        /// strings and bytes into ints before calling this.
        #[pymethod]
        fn seed(zelf: &Py<Self>, n: OptionalArg<PyObjectRef>, vm: &VirtualMachine) -> PyResult<()> {
            let n = match n {
                OptionalArg::Present(n) if !vm.is_none(&n) => n,
                _ => return zelf.seed_from_entropy(vm),
            };
            let mut key = match n.downcast_ref::<PyInt>() {
                Some(int) => int.as_bigint().magnitude().to_u32_digits(),
                None => BigInt::from(n.hash(vm)?).magnitude().to_u32_digits(),
            };
            if key.is_empty() {
                key.push(0);
            }
            *zelf.rng.lock() = MT19937::new_with_slice_seed(&key);
            Ok(())
        }

        #[pymethod]
        fn getrandbits(zelf: &Py<Self>, k: isize, vm: &VirtualMachine) -> PyResult<BigInt> {
            if k < 0 {
                return Err(vm.new_value_error("number of bits must be non-negative"));
            }
            let mut rng = zelf.rng.lock();
            // Least significant word first; the last keeps the top bits of its draw.
            let mut left = k as usize;
            let mut words = Vec::with_capacity(left.div_ceil(32));
            while left > 0 {
                let word = rng.next_u32();
                words.push(if left < 32 { word >> (32 - left) } else { word });
                left = left.saturating_sub(32);
            }
            Ok(BigInt::from_biguint(Sign::Plus, BigUint::new(words)))
        }

        #[pymethod]
        fn getstate(zelf: &Py<Self>, vm: &VirtualMachine) -> PyTupleRef {
            let rng = zelf.rng.lock();
            let index = u32::try_from(rng.get_index()).expect("the index is at most 625");
            let items = rng
                .get_state()
                .iter()
                .chain([&index])
                .map(|&word| vm.ctx.new_int(word).into())
                .collect();
            vm.ctx.new_tuple(items)
        }

        #[pymethod]
        fn setstate(zelf: &Py<Self>, state: PyTupleRef, vm: &VirtualMachine) -> PyResult<()> {
            let items = state.as_slice();
            if items.len() != mt19937::N + 1 {
                return Err(vm.new_value_error("state vector is the wrong size"));
            }
            let mut words = [0u32; mt19937::N];
            for (word, item) in words.iter_mut().zip(items) {
                *word = item.try_to_value(vm)?;
            }
            // As CPython: an index out of 0..=N is a ValueError (OverflowError past a C long).
            let index: i64 = items[mt19937::N].try_to_value(vm)?;
            let index = usize::try_from(index)
                .ok()
                .filter(|&i| i <= mt19937::N)
                .ok_or_else(|| vm.new_value_error("invalid state"))?;
            let mut rng = zelf.rng.lock();
            rng.set_state(&words);
            rng.set_index(index);
            Ok(())
        }
    }
}
