// A Go library loaded into a C process: it releases memory through the Go
// runtime's own system call layer (no libc), as a Go runtime does with its heap.
package main

import "C"

import (
	"syscall"
	"unsafe"
)

//export foreign_munmap
func foreign_munmap(p unsafe.Pointer, n C.size_t) C.int {
	_, _, e := syscall.Syscall(syscall.SYS_MUNMAP, uintptr(p), uintptr(n), 0)
	return C.int(e)
}

//export foreign_madvise_dontneed
func foreign_madvise_dontneed(p unsafe.Pointer, n C.size_t) C.int {
	_, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(p), uintptr(n), 4)
	return C.int(e)
}

func main() {}
