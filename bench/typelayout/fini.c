// Runs the dump when the process exits, once every image's type metadata is registered.
extern void typelayout_dump(void);
__attribute__((destructor)) static void typelayout_fini(void) { typelayout_dump(); }
