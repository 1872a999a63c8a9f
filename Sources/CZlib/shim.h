#include <zlib.h>

/* inflateInit2 is a macro (it passes the library version and the stream size): Swift cannot call it. */
static inline int ap_inflate_init2(z_stream *stream, int window_bits) {
    return inflateInit2(stream, window_bits);
}

/* deflateInit2 likewise (the unit tests compress fixtures with it). */
static inline int ap_deflate_init2(z_stream *stream, int level, int window_bits) {
    return deflateInit2(stream, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
}
