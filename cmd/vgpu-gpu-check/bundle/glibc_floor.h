/*
 * glibc_floor.h - lets the gpu bundle's vgpu-gpu-check (cgo: go-nvml dlopens libnvidia-ml) load on
 * glibc 2.28 although it is built on a newer one. make gpu-bundle force-includes it into every cgo
 * object (CGO_CFLAGS=-include, runtime/cgo and go-nvml's dl package too) and checks the result
 * with vcuda/tests/glibc_floor.sh.
 *
 * Building on glibc >= 2.34 binds the pthread and dl functions to their 2.34 versions (they moved
 * into libc.so.6); these pins bind them to the versions every x86_64 glibc has, which libc.so.6
 * keeps for compatibility and libpthread.so.0 / libdl.so.2 define on older glibc (make gpu-bundle
 * links both as needed libraries). __libc_start_main, called by the C start file, is pinned in
 * start_gpubundle.go, which replaces that file.
 */
#ifndef GPU_CHECK_GLIBC_FLOOR_H
#define GPU_CHECK_GLIBC_FLOOR_H
/* (no __GLIBC__ test: it is forced in before any header defines it) */
#if !defined(__ASSEMBLER__) && defined(__linux__) && defined(__x86_64__)
#define GC_PIN(sym) __asm__(".symver " #sym "," #sym "@GLIBC_2.2.5")
GC_PIN(pthread_create);
GC_PIN(pthread_detach);
GC_PIN(pthread_key_create);
GC_PIN(pthread_getspecific);
GC_PIN(pthread_setspecific);
GC_PIN(pthread_attr_getstack);
GC_PIN(pthread_attr_getstacksize);
GC_PIN(pthread_attr_setstacksize);
GC_PIN(pthread_getattr_np);
GC_PIN(pthread_sigmask);
GC_PIN(dlopen);
GC_PIN(dlclose);
GC_PIN(dlerror);
GC_PIN(dlsym);
#undef GC_PIN
#endif
#endif
