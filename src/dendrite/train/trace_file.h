// Writing a trace (core/trace.h) of every rank into one file.
#pragma once

#include <string>

#include "dendrite/comm/grid.h"

namespace dendrite {

// Stops the recording, gathers every rank's spans to rank 0 of the grid's
// world, which writes `path` in the Trace Event format (through a temporary
// file, renamed at the end; its folder is created). Collective over the
// world. Returns the number of spans written (on rank 0; 0 elsewhere).
int64_t write_trace(ProcessGrid& grid, const std::string& path);

// Fails, naming the option, the path and the fix, unless `path` can be
// written (its folder is created): checked before a run so that it does not
// fail at its end.
void check_trace_path(const std::string& path, const char* option = "--trace");

// Writes `text` to `path` whole: into a temporary file beside it, renamed
// over it at the end, so that a failed write leaves the earlier file.
void write_file_whole(const std::string& path, const std::string& text, const char* option);

// Starts a recording on every rank with a common origin (after a barrier).
// Collective over the world.
void start_trace(ProcessGrid& grid);

}  // namespace dendrite
