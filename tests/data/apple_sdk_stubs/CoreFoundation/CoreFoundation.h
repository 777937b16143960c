#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <dispatch/dispatch.h>  // the SDK's CoreFoundation brings libdispatch's types along
typedef double CFTimeInterval;
typedef const void *CFTypeRef;
typedef const struct __CFAllocator *CFAllocatorRef;
typedef const struct __CFArray *CFArrayRef;
typedef long CFIndex;
typedef struct {
    CFIndex version;
} CFArrayCallBacks;
extern "C" {
extern const CFArrayCallBacks kCFTypeArrayCallBacks;
extern const CFAllocatorRef kCFAllocatorDefault;
CFArrayRef CFArrayCreate(CFAllocatorRef, const void **, CFIndex, const CFArrayCallBacks *);
}
