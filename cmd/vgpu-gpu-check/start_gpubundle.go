//go:build gpubundle && linux && amd64

package main

// The gpu bundle's start file (make gpu-bundle links with -nostartfiles and
// the tag gpubundle; see bundle/glibc_floor.h). glibc >= 2.34's start file
// calls __libc_start_main@GLIBC_2.34, which no older glibc has; this _start
// is glibc's x86_64 one calling the version every glibc has. That version
// runs the program's init arrays only through its init argument on glibc <
// 2.34 (and calls init when given on newer ones), so gc_init runs them.

/*
__asm__(
	".symver __libc_start_main,__libc_start_main@GLIBC_2.2.5\n"
	".text\n"
	".globl _start\n"
	".type _start,@function\n"
	"_start:\n"
	"	xorl %ebp, %ebp\n"
	"	movq %rdx, %r9\n"          // rtld_fini
	"	popq %rsi\n"               // argc
	"	movq %rsp, %rdx\n"         // argv
	"	andq $-16, %rsp\n"
	"	pushq %rax\n"
	"	pushq %rsp\n"              // stack_end
	"	xorl %r8d, %r8d\n"         // fini: none
	"	leaq gc_init(%rip), %rcx\n" // init
	"	movq main@GOTPCREL(%rip), %rdi\n"
	"	call *__libc_start_main@GOTPCREL(%rip)\n"
	"	hlt\n"
);
typedef void (*gc_initfn)(int, char **, char **);
extern gc_initfn __preinit_array_start[] __attribute__((visibility("hidden")));
extern gc_initfn __preinit_array_end[] __attribute__((visibility("hidden")));
extern gc_initfn __init_array_start[] __attribute__((visibility("hidden")));
extern gc_initfn __init_array_end[] __attribute__((visibility("hidden")));
void gc_init(int argc, char **argv, char **envp) {
	for (gc_initfn *f = __preinit_array_start; f < __preinit_array_end; f++)
		(*f)(argc, argv, envp);
	for (gc_initfn *f = __init_array_start; f < __init_array_end; f++)
		(*f)(argc, argv, envp);
}
*/
import "C"
