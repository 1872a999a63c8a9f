// hiredis (Debian libhiredis-dev 0.14): only its command formatter and reply reader are used (see RESPCodec.swift).
#include <hiredis/hiredis.h>
