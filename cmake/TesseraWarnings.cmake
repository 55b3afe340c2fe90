# Per-target warnings and host tuning; no directory-wide flags.
function(tessera_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  if(TESSERA_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  tessera_hardening_flags(${target})  # TESSERA_SANITIZE / TESSERA_FUZZ (TesseraHardening.cmake)
endfunction()
