// The `dendrite` command (apps/cli.cpp), without test hooks.
#include "apps/commands.h"

int main(int argc, char** argv) { return dendrite::app::dendrite_main(argc, argv, nullptr); }
