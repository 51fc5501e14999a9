# Sources of the library's data area (target_sources on 'accelerate').
