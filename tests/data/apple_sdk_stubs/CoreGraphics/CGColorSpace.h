#pragma once
typedef struct CGColorSpace *CGColorSpaceRef;
