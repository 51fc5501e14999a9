# Sources of the library's accelerator area (target_sources on 'accelerate').
