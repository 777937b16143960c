#pragma once
typedef struct __IOSurface *IOSurfaceRef;
