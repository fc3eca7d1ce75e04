/*
 * The libc functions the memory hooks intercept to see releases (the
 * library's own list is targets[] in opal/memoryhooks/memory_intercepts.c):
 * one list for the tests that walk them, to extend with that one.
 */
#ifndef OPAL_TEST_RELEASE_FUNCTIONS_H
#define OPAL_TEST_RELEASE_FUNCTIONS_H

#define TEST_RELEASE_FUNCTIONS                                                         \
    "munmap", "mremap", "madvise", "mmap", "mmap64", "brk", "sbrk", "shmdt", "shmat",  \
        "process_madvise", "remap_file_pages", "ftruncate", "ftruncate64", "truncate", \
        "truncate64", "fallocate", "fallocate64"

#endif
