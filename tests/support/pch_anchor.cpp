// Owns tests/support/pch.h so test binaries can REUSE_FROM it.
