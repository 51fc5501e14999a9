# Sources of the library's parallel area (target_sources on 'accelerate').
