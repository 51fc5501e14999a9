// accelerate-cpp: Hugging Face Accelerate's training-loop API for LibTorch.
// Include this one header.
#pragma once

#include "accelerate/collectives.h"
#include "accelerate/communicator.h"
#include "accelerate/environment.h"
#include "accelerate/errors.h"
#include "accelerate/job_state.h"
#include "accelerate/object_serializer.h"
#include "accelerate/process_control.h"
#include "accelerate/version.h"
