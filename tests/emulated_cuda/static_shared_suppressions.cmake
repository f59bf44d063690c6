# Writes ThreadSanitizer's suppressions for the race check with blocks run
# together (race_check.h): one line for each static __shared__ variable in
# the section emu_static_shared of the files given. Blocks run together
# share those variables' addresses, where a GPU gives each block its own, so
# ThreadSanitizer would report every two blocks that use one. The check in
# order, which runs without these lines, sees the races within a block there.
# Run as: cmake -DOBJDUMP=objdump -DFILES="a;b" -DOUT=file.supp -P this file
set(lines "# Made by static_shared_suppressions.cmake from ${FILES}\n")
set(count 0)
foreach(file IN LISTS FILES)
  execute_process(COMMAND ${OBJDUMP} -t -C ${file} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${OBJDUMP} -t -C ${file} failed (${rc})")
  endif()
  string(REPLACE "\n" ";" symbol_lines "${symbols}")
  foreach(line IN LISTS symbol_lines)
    # "<address> l     O emu_static_shared	<size> <name>", the name demangled
    # as ThreadSanitizer writes it in a report's "Location is global".
    if(line MATCHES "[ \t]O[ \t]+emu_static_shared[ \t]+[0-9a-f]+[ \t]+(.+)$")
      string(STRIP "${CMAKE_MATCH_1}" name)
      string(APPEND lines "race:^${name}$\n")
      math(EXPR count "${count} + 1")
    endif()
  endforeach()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "no static __shared__ variable found in ${FILES}: this script no "
                      "longer reads objdump's table as it should")
endif()
file(WRITE ${OUT} "${lines}")
message(STATUS "${count} static __shared__ variables suppressed in ${OUT}")
