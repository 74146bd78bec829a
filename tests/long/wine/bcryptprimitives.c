/*
 * A stand-in for Windows' bcryptprimitives.dll, for running our Windows binaries under wine 8
 * only: never shipped. Rust 1.78 and later fill their random bytes (HashMap keys, getrandom)
 * through `ProcessPrng`, which wine 8 does not export, so a Rust 1.95 binary fails to load there.
 * This DLL, placed beside the executable, exports it on top of advapi32's `SystemFunction036`
 * (RtlGenRandom), which wine has.
 *
 * Build: x86_64-w64-mingw32-gcc -shared -O2 -o bcryptprimitives.dll bcryptprimitives.c -ladvapi32
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

/* Documented to always succeed; RtlGenRandom takes at most ULONG bytes a call. */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x40000000 ? 0x40000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
