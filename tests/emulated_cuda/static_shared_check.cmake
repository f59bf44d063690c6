# Fails when a kernel of the CUDA backend built on the emulator keeps a
# static __shared__ variable outside the section emu_static_shared, where the
# emulator cannot poison it per block (cuda_runtime.h). GCC before 14 drops
# the section attribute of a static in a function template (its PR 70435):
# a kernel template's shared memory must be dynamic (DENDRITE_DYNAMIC_SHARED).
# Run as: cmake -DOBJDUMP=objdump -DLIB=libdendrite_cuda_emulated.a -P this file
execute_process(COMMAND ${OBJDUMP} -t ${LIB} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${OBJDUMP} -t ${LIB} failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${symbols}")
set(kernel_statics 0)
set(escaped "")
foreach(line IN LISTS lines)
  # A function-local static (_ZZ...) of a kernel; allow_shared's `done` is host code.
  if(line MATCHES " O " AND line MATCHES "_ZZ[^ ]*_kernel" AND NOT line MATCHES "allow_shared")
    math(EXPR kernel_statics "${kernel_statics} + 1")
    if(NOT line MATCHES "emu_static_shared")
      string(APPEND escaped "\n  ${line}")
    endif()
  endif()
endforeach()
if(kernel_statics EQUAL 0)
  message(FATAL_ERROR "no kernel's static shared memory found in ${LIB}: the check no longer "
                      "sees what it checks")
endif()
if(NOT escaped STREQUAL "")
  message(FATAL_ERROR "kernel statics outside emu_static_shared (a kernel template's "
                      "__shared__ under GCC? make it DENDRITE_DYNAMIC_SHARED):${escaped}")
endif()
message(STATUS "${kernel_statics} static __shared__ variables of kernels, all in emu_static_shared")
