#pragma once
typedef struct objc_class *Class;
typedef struct objc_object { Class isa; } *id;
typedef struct objc_selector *SEL;
typedef struct objc_protocol Protocol;
typedef signed char BOOL;
extern "C" {
SEL sel_registerName(const char *);
Class objc_lookUpClass(const char *);
Protocol *objc_getProtocol(const char *);
bool class_respondsToSelector(Class, SEL);
Class object_getClass(id);
}
