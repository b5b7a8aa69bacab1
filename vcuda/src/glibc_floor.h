/*
 * glibc_floor.h - keep libvcuda.so loadable by the oldest glibc it meets.
 *
 * libvcuda.so is preloaded into whatever image a GPU container runs, so it may need no glibc
 * symbol version newer than VC_GLIBC_FLOOR: 2.28, the glibc of the oldest published CUDA 12 base
 * images (UBI 8 / Rocky Linux 8). `make test` checks the built library (tests/glibc_floor.sh).
 *
 * Building on glibc >= 2.34 binds the pthread and dl functions to their 2.34 versions (they moved
 * into libc); the pins below bind them to the versions every glibc has, which libc.so.6 keeps for
 * compatibility and which libpthread.so.0 / libdl.so.2 define on older glibc (hence those two are
 * linked as needed libraries). stat and fstat are not used: before 2.33 they were not exported
 * functions at all (see vc_fd_size).
 */
#ifndef VCUDA_GLIBC_FLOOR_H
#define VCUDA_GLIBC_FLOOR_H

#define VC_GLIBC_FLOOR "2.28"

#if defined(__GLIBC__)
#if defined(__x86_64__)
#define VC_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define VC_GLIBC_BASE "GLIBC_2.17"
#else
#error "glibc_floor.h: set the base glibc symbol version of this architecture"
#endif

#define VC_PIN(sym, ver) __asm__(".symver " #sym "," #sym "@" ver)
VC_PIN(pthread_create, VC_GLIBC_BASE);
VC_PIN(pthread_once, VC_GLIBC_BASE);
VC_PIN(pthread_mutexattr_init, VC_GLIBC_BASE);
VC_PIN(pthread_mutexattr_destroy, VC_GLIBC_BASE);
VC_PIN(pthread_mutexattr_setpshared, VC_GLIBC_BASE);
VC_PIN(dlopen, VC_GLIBC_BASE);
VC_PIN(dlerror, VC_GLIBC_BASE);
VC_PIN(dladdr, VC_GLIBC_BASE);
VC_PIN(dlvsym, VC_GLIBC_BASE);
#if defined(__x86_64__)
/* Robust mutexes arrived in 2.12 on x86_64 (aarch64 had them from its base version). */
VC_PIN(pthread_mutex_consistent, "GLIBC_2.12");
VC_PIN(pthread_mutexattr_setrobust, "GLIBC_2.12");
#else
VC_PIN(pthread_mutex_consistent, VC_GLIBC_BASE);
VC_PIN(pthread_mutexattr_setrobust, VC_GLIBC_BASE);
#endif
#undef VC_PIN
#endif /* __GLIBC__ */

#endif
