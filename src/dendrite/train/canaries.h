// Canaries: passages of text the corpus lacks, inserted R times each into the
// training token stream by `dendrite tokenize --canaries FILE --canary-repeat R`,
// so that memorization can be measured on text of known frequency
// (`dendrite memorization`, DESIGN.md section 7).
//
// Passage format of FILE: passages are separated by lines that are empty (or
// hold only spaces) or hold only '%' (the format of fortune(6) files), so a
// fortune file or a text of blank-line paragraphs both work. Newlines at the
// ends of a passage are trimmed; empty passages are skipped.
//
// Insertion: passage i gets R_i copies. The copies are numbered round by
// round (round r: every passage with R_i > r, in passage order; with one R for
// all, copy j is passage j mod P) and copy j goes at a position drawn from
// (seed, j), moved forward to just after the next newline token, as the
// passage's ids followed by one newline. Only train.bin gets canaries, never
// val.bin. Their locations go to canaries.json beside the token files:
//   {"repeat": R (or [R_0, R_1, ...] when they differ), "seed": S, "separator": "...",
//    "canaries": [{"index": i, "offset": o, "length": L, "text": "..."}, ...]}
// one entry per occurrence, sorted by offset: passage i's L tokens start at
// token o of train.bin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dendrite {

// The passages of a canary file's text (format above).
std::vector<std::string> split_passages(const std::string& text);

struct CanaryOccurrence {
  int index = 0;        // passage
  uint64_t offset = 0;  // first token in the training stream
  int64_t length = 0;   // tokens of the passage (without the newline after it)
};

// Inserts `repeat` copies of every passage (ids) into tokens; returns where
// they are, sorted by offset. newline_id < 0: positions are not moved.
std::vector<CanaryOccurrence> insert_canaries(std::vector<int32_t>& tokens,
                                              const std::vector<std::vector<int32_t>>& passages,
                                              int repeat, uint64_t seed, int32_t newline_id);
// The same with repeats[i] copies of passage i.
std::vector<CanaryOccurrence> insert_canaries(std::vector<int32_t>& tokens,
                                              const std::vector<std::vector<int32_t>>& passages,
                                              const std::vector<int>& repeats, uint64_t seed,
                                              int32_t newline_id);

void write_canaries_json(const std::string& path, const std::vector<std::string>& texts,
                         const std::vector<CanaryOccurrence>& where,
                         const std::vector<int>& repeats, uint64_t seed);

struct CanaryFile {
  std::vector<std::string> texts;          // passage i's text
  std::vector<CanaryOccurrence> where;     // every occurrence
  std::vector<int> copies() const;         // occurrences of each passage
};
// Reads canaries.json; errors name the file and the fix.
CanaryFile read_canaries_json(const std::string& path);

}  // namespace dendrite
