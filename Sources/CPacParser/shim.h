#include <stdarg.h>
#include <pacparser.h>
