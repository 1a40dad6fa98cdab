"""What is queued and in what order: the survey, ranking, re-queue, promotion, steering, the views."""
