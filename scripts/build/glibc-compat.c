/*
 * Linked into the packaged efatop only (scripts/build/package): binds the glibc functions whose default
 * symbol version is newer than the packages' oldest glibc (2.34, Amazon Linux 2023) to their older version,
 * so the binary built here (Debian 12, glibc 2.36) loads on every distribution the packages serve.
 * scripts/build/check-glibc fails the build when anything newer is left.
 *
 * hypotf: glibc 2.35 gave it a new default version (GLIBC_2.35, the same computation without the old SVID
 * error-handling wrapper); plotters' f32::hypot in the report's charts calls it. A definition here takes
 * precedence over libm's for the executable's own references, and calls the version every glibc since the
 * architecture's first has.
 */
#if defined(__x86_64__)
#define EFATOP_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define EFATOP_GLIBC_BASE "GLIBC_2.17"
#else
#error "glibc-compat.c: add this architecture's first glibc symbol version"
#endif

float efatop_glibc_hypotf(float x, float y);
__asm__(".symver efatop_glibc_hypotf, hypotf@" EFATOP_GLIBC_BASE);

float hypotf(float x, float y);
float hypotf(float x, float y) { return efatop_glibc_hypotf(x, y); }
