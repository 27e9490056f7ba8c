// Umbrella header of the flashattn C++ API.
#pragma once

#include "flashattn/attention.h"
#include "flashattn/kvcache.h"
#include "flashattn/types.h"
