//! Bounds-checked access to the guest's linear memory, seen as a byte slice. Every pointer and
//! length is the guest's to choose: one that does not fit is `EFAULT`, never a panic or a trap.
//! Nothing here allocates more than the small, capped arrays it reads.

use super::abi::Errno;

/// The most buffers one `fd_read` or `fd_write` takes (wasi-libc's `IOV_MAX`); more is `EINVAL`.
pub(crate) const MAX_IOVECS: u32 = 1024;
/// The longest path a call reads (wasi-libc's `PATH_MAX`); longer is `ENAMETOOLONG`.
pub(crate) const MAX_PATH: u32 = 4096;

/// The `len` bytes at `ptr`.
pub(crate) fn bytes(mem: &[u8], ptr: u32, len: u32) -> Result<&[u8], Errno> {
    let (start, end) = range(ptr, len)?;
    mem.get(start..end).ok_or(Errno::Fault)
}

/// The `len` bytes at `ptr`, to be written.
pub(crate) fn bytes_mut(mem: &mut [u8], ptr: u32, len: u32) -> Result<&mut [u8], Errno> {
    let (start, end) = range(ptr, len)?;
    mem.get_mut(start..end).ok_or(Errno::Fault)
}

/// `ptr..ptr + len` as indices, which overflow only where `usize` is 32 bits wide.
fn range(ptr: u32, len: u32) -> Result<(usize, usize), Errno> {
    let start = ptr as usize;
    let end = start.checked_add(len as usize).ok_or(Errno::Fault)?;
    Ok((start, end))
}

/// Checks that an `N`-byte result fits at `ptr`, before a call changes anything: a call whose
/// result cannot be delivered must not have happened (an fd opened but never returned).
pub(crate) fn check_out<const N: usize>(mem: &[u8], ptr: u32) -> Result<(), Errno> {
    bytes(mem, ptr, N as u32).map(|_| ())
}

/// Writes `data` at `ptr`.
pub(crate) fn write(mem: &mut [u8], ptr: u32, data: &[u8]) -> Result<(), Errno> {
    bytes_mut(mem, ptr, data.len() as u32)?.copy_from_slice(data);
    Ok(())
}

pub(crate) fn write_u32(mem: &mut [u8], ptr: u32, value: u32) -> Result<(), Errno> {
    write(mem, ptr, &value.to_le_bytes())
}

pub(crate) fn write_u64(mem: &mut [u8], ptr: u32, value: u64) -> Result<(), Errno> {
    write(mem, ptr, &value.to_le_bytes())
}

/// A path argument: `EFAULT` outside memory, `ENAMETOOLONG` past [`MAX_PATH`], `EILSEQ` when
/// not UTF-8 (as wasmtime decodes it). Borrowed from the guest's memory, not copied.
pub(crate) fn path(mem: &[u8], ptr: u32, len: u32) -> Result<&str, Errno> {
    let raw = bytes(mem, ptr, len)?;
    if len > MAX_PATH {
        return Err(Errno::Nametoolong);
    }
    std::str::from_utf8(raw).map_err(|_| Errno::Ilseq)
}

/// An `iovec` or `ciovec` array: each buffer's (pointer, length), read once, so that the
/// guest cannot change them under the call (a buffer may overlap the array), with every buffer
/// checked to lie in memory and their total to fit the `size` the call returns.
pub(crate) fn iovecs(mem: &[u8], ptr: u32, count: u32) -> Result<Vec<(u32, u32)>, Errno> {
    if count > MAX_IOVECS {
        return Err(Errno::Inval);
    }
    let array = bytes(mem, ptr, count * 8)?;
    let mut total = 0u64;
    let mut out = Vec::with_capacity(count as usize);
    for iov in array.chunks_exact(8) {
        let buf = u32::from_le_bytes([iov[0], iov[1], iov[2], iov[3]]);
        let len = u32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]);
        bytes(mem, buf, len)?;
        total += u64::from(len);
        out.push((buf, len));
    }
    if total > u64::from(u32::MAX) {
        return Err(Errno::Inval);
    }
    Ok(out)
}
